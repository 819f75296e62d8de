"""What one pass reports about itself."""
from dataclasses import dataclass


@dataclass
class PassStats:
    name: str
    changed: int = 0          # how many nodes the pass rewrote, folded or removed
    fixed_point: bool = True  # False when the pass stopped before nothing more could change
