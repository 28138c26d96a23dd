"""The cache study: when JSA's persistent MIS cache helps (`python -m benchmarks.studies.cache.study`, its runs and
report), and why a mid-run cache can hurt (`python -m benchmarks.studies.cache.diagnosis`: q retrained at a frozen θ on
the chain's states and on fresh proposals). Both write under benchmarks/results/cache-study/."""
