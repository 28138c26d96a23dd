"""Tests of the early checks (launch/checks/): before torch, Lightning and Hydra are imported."""
