"""The model client: routes, fallbacks, key pools, breakers, budgets."""
