"""The field study: every discrete estimator under the JSA paper's protocol, with each prior, seeds, a second data set
and equal cost (`python -m benchmarks.studies.field.study`). `plan` names its arms and jobs, `study` runs them and
`report` writes benchmarks/results/field-study/report.md from the records."""
