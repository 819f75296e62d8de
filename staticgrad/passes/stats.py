"""What one pass reports about itself."""
from dataclasses import dataclass, field


@dataclass
class PassStats:
    name: str
    changed: int = 0          # how many nodes the pass rewrote, folded or removed
    fixed_point: bool = True  # False when the pass stopped before nothing more could change
    details: dict = field(default_factory=dict)    # what it did, by kind (a loop pass: hoisted, sunk, ...)
