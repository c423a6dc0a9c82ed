"""Running Mantle turns: the turn loop and what it drives."""
