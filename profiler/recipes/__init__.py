"""profile-step as an Nsight Systems recipe, and nsys's own recipes as cross-checks.

``offload_overlap/`` is the recipe folder that ``profile-step install-recipe``
copies into nsys's ``nsys_recipe/recipes``; it is a thin shell over
``mapper`` (one report: the ``analyze --json`` documents as table rows) and
``tables`` (the rows of many reports as parquet).
"""
