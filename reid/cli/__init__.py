"""Command-line programs (the code behind tools/*.py): each parses its flags, then calls the library."""
