"""LLM access: one OpenAI-compatible client (`client`), the servers the pipeline can start (`servers`, `vllm_env`),
shipped models (`models`), the teacher-forced scorer (`scorer`), the run's response cache and dollar cap (`ledger`)
and the served tokenizers (`tokenize`). Import the module you need: this package imports none of them, so a
command that needs only a tokenizer does not load the client."""
