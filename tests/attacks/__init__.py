"""Tests of gradcore.attacks, one file per module of the package."""
