"""Exporter scrape benchmark."""
