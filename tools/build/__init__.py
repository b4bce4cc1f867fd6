"""The site build, its generated pages, the student edition, the test command."""
