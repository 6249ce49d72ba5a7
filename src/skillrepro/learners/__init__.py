"""Methods: how a library (skills, notes) changes between rollout batches."""
