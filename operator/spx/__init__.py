"""spx — measures when splitting a tensor-parallel projection by token beats replicating it."""

__version__ = "0.7.0"
