"""Helpers shared by the tests, so that no test module imports another."""
