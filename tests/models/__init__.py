"""Tests of the models and the components they share (models/)."""
