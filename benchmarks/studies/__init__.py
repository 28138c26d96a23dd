"""The studies: each trains runs under one protocol (`python -m benchmarks.studies.NAME`; a study of several
modules is a sub-package: `python -m benchmarks.studies.cache.study`, `python -m benchmarks.studies.field.study`),
keeps one record per finished run and writes its report under benchmarks/results/<study>/."""
