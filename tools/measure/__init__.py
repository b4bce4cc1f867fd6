"""On-demand measurements; results go to tools/results/ (or posenc_lib/data/)."""
