"""Turning analysis results into text for people and machines."""
