"""ragrepro: a Snakemake harness reproducing Lewis et al. (2020), Retrieval-Augmented Generation."""

import os

__version__ = "0.1.0"

# Intel's reproducibility conditions for MKL (its developer guide, "Reproducibility Conditions"):
# conditional numerical reproducibility on ("AUTO": the code path MKL picks for this CPU, run the
# same way every time) and no dynamic adjustment of thread counts by MKL or OpenMP. Pretraining runs
# several threads; without these, a run may differ from the last in the last bits. On the
# development machine they gave the same bytes as before (the reliability DAG's and config.yaml's
# pretrained generators). MKL and OpenMP read them when loaded, so they are set here, before any rag
# module imports torch: in the rag command and Snakemake (its jobs inherit them). A value the user
# set wins.
REPRODUCIBLE_ENV = {"MKL_CBWR": "AUTO", "MKL_DYNAMIC": "FALSE", "OMP_DYNAMIC": "FALSE"}
for _name, _value in REPRODUCIBLE_ENV.items():
    os.environ.setdefault(_name, _value)
