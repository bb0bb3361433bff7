"""Tools on top of the pipeline: the command line, explain / discover, check-equiv, dumps, the demo."""
