"""Settings: every setting typed and validated, where each comes from (environment, .env, the
user's config file), roles."""
