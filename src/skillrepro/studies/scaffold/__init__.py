"""SkillScaffold (seed 002): skill-free Scouts, candidate skill cards, likelihood-ratio utility, positive-gated
injection, GRPO joint training, and the tables of the paper, in modules along those concerns (lowest first):

- records: the Scouts as the scorer and the Generator read them, and the Parquet records of the rules;
- selection: utility and selection (equations 8-10) with table 3's ablations, per query;
- evidence: a query's Scouts as the Generator's evidence (appendix A.4), within a budget;
- cards: the card format and its check, constrained decoding of cards, the Generator's prompt and requests;
- statistics: the bootstrap interval the tables use and the Pass@k estimate;
- settings: the `scaffold:` config section as typed settings (table 5's training keys checked);
- rollouts: the query pools and playing episodes (Scouts, Post-Scouts, evaluations) on the runner;
- scoring: l(c; tau), the likelihood of a Scout's actions under a context, on the scorer;
- validation: the validation experiment (section 5.4, figures 5-6) and the pilot diagnostics (figures 2-3);
- heldout: held-out evaluation tables (tables 1, 2, 3 and 6, figures 1 and 7);
- grpo: the GRPO update on TRL (section 4.5, algorithm 1, equations 3, 11, 12);
- cohort: internalization (table 4);
- figures: the validation experiment's figures and the training study's figures 1 and 6-8;
- data: WebShop's category split and tau2-bench's tasks (appendix A.1).

The package imports none of its modules: a caller imports the module that holds what it needs.
"""
