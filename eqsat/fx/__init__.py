"""FX graphs in and out: terms and facts from a graph, the chosen graph written back, fake values."""
