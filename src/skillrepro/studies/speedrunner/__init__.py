"""SpeedRunner (seed 000): what the workflow makes of its runs. Its actor, runner and methods are the package's
core (skillrepro.agent, .runner, .methods); here are its tables, statistics and figures (analysis) and the pages of
a run's libraries and episodes (views)."""
