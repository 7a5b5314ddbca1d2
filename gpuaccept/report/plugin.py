"""Report plugin: Allure labels and attachments, plots, environment.properties (placeholder)."""
