"""The console's runtime settings page (``console``): its form (``forms``), the model aliases
as rows (``aliases``) and the admin API key's pages (``api_key``)."""
