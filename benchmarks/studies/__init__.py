"""The studies: each trains runs under one protocol (`python -m benchmarks.studies.NAME`), keeps one record per
finished run and writes its report under benchmarks/results/<study>/."""
