"""Samplers and Monte Carlo estimators: plain functions and small classes on tensors, no Lightning."""

from samplers.cache import LatentCache, refresh_starts
from samplers.hmc import HMC, leapfrog
from samplers.importance import ImportanceEstimate, importance_log_likelihood, log_mean_exp
from samplers.mis import (
    MISChain,
    MISSample,
    NaiveMISSample,
    categorical_log_prob,
    index_cached_mis,
    mis_chain,
    naive_mis,
    sample_categorical,
)
from samplers.multi_sample import importance_weighted_bound, rws_surrogate, vimco_baselines, vimco_surrogate
from samplers.score_function import categorical_score_norm_sq, leave_one_out_optimal_baseline, score_function_surrogate
from samplers.sgmcmc import SGHMC, SGLD, SGMCMC, SGNHT, SampleCollector, Santa
from samplers.visits import (
    GradientRows,
    candidate_weights,
    expected_visits,
    fresh_proposal_weights,
    gradient_rows,
    sum_and_sample,
    visit_counts,
)

__all__ = [
    "GradientRows",
    "HMC",
    "ImportanceEstimate",
    "LatentCache",
    "MISChain",
    "MISSample",
    "NaiveMISSample",
    "candidate_weights",
    "categorical_log_prob",
    "expected_visits",
    "fresh_proposal_weights",
    "gradient_rows",
    "importance_log_likelihood",
    "importance_weighted_bound",
    "index_cached_mis",
    "log_mean_exp",
    "mis_chain",
    "naive_mis",
    "refresh_starts",
    "rws_surrogate",
    "sample_categorical",
    "SGHMC",
    "SGLD",
    "SGMCMC",
    "SGNHT",
    "SampleCollector",
    "Santa",
    "categorical_score_norm_sq",
    "leapfrog",
    "leave_one_out_optimal_baseline",
    "score_function_surrogate",
    "sum_and_sample",
    "vimco_baselines",
    "vimco_surrogate",
    "visit_counts",
]
