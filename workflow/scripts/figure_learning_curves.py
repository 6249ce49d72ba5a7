"""Learning curves: test success and output tokens per episode against training rollouts."""
import pandas as pd

from skillrepro import analysis
from skillrepro.pipeline import setup_logging

log = setup_logging(snakemake)
analysis.plot_learning_curves(pd.read_csv(snakemake.input[0]), snakemake.output[0])
log.info("wrote %s", snakemake.output[0])
