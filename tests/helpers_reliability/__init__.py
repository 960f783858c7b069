"""Harness scripts and fixtures of the reliability tests (crash, concurrency, PostgreSQL).

The scripts run as separate processes (they are killed, raced and restarted); the
fixtures give each test its own migrated database that those processes can share.
"""
