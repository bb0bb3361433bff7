"""The egglog engine: rows in, rules declared as graphs need them, saturation, the frozen e-graph out."""
