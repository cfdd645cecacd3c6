import jax

jax.config.update("jax_enable_x64", True)


def pytest_collection_modifyitems(items):
    # The longest work first: the seed claims (one worker, sharing cached simulations) and the
    # notebooks (subprocesses); left for the end, they keep one worker busy while the other
    # idles.
    first = ("test_seeds.py", "test_notebooks.py")
    items.sort(key=lambda item: item.path.name not in first)
