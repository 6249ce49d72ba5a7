"""Studies built on the shared llm, envs, agent and store rooms, with their own rules, tables and figures:
the KV-cache reuse study (`kvcache`) and SkillScaffold (`scaffold`). They are not methods of the online loop."""
