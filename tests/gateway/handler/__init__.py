"""What plugin code touches: routers and middlewares."""
