"""mlab's command line."""
