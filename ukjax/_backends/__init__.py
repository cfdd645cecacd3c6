"""The routes a simulation computes by, as objects (`_backend`), and what they run: the
compiled tree kernel (`_tree_kernel`, its sources in `native/`, built by `_build`) and the
compiled contact solve (`_contact_kernel`)."""
