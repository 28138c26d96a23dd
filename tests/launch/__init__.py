"""Tests of the two front ends and the run rules (launch/, train.py)."""
