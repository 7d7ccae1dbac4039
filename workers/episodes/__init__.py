"""Agent episodes: many turns of trial and error in a workspace that survives only as files."""
