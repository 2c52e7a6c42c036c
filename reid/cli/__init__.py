"""Command-line programs (the wiring behind tools/*.py): the only layer that joins engine and evaluation."""
