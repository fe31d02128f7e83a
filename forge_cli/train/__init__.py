"""The trainer: prefix-tree packing, losses, train engines, weight sync, checkpoints."""
