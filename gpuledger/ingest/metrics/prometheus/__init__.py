"""Backfilling DCGM samples from a Prometheus HTTP API: client, decoder, worker pool, backfill."""
