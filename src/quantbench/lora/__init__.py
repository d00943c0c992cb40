"""LoRA: train an adapter (train.py), merge it into the base and verify the merge (merge.py)."""
