"""Figure 4: SpeedRunner ablations: headline metric and output tokens per episode over training, mean ± 1 s.d. over seeds."""
import pandas as pd

from skillrepro import analysis
from skillrepro.pipeline import setup_logging

log = setup_logging(snakemake)
study = analysis.Study(**snakemake.params.study)
analysis.curves(pd.read_csv(snakemake.input[0]), study.groups("fig4"), study, snakemake.output[0],
                title="Figure 4: SpeedRunner ablations", needs="SpeedRunner variants with options (configs/paper.yaml)")
log.info("wrote %s", snakemake.output[0])
