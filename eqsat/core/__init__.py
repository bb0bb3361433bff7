"""The floor: plain values every stage reads (the e-graph value, kernel rows, rules, spellings,
contracts, facts, the IR's names); it imports nothing else of the project."""
