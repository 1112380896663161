"""One module per chapter of the book: each ``build()`` computes every frame, figure and glued value its MyST
notebook shows, and the notebook displays and glues them."""
