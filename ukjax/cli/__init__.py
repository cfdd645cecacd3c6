"""The command line (`ukjax`: `main`), its commands (`commands`), the cache of their compiled
programs (`cache`) and the bench against MuJoCo (`bench`). The library never imports it."""
