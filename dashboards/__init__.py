"""The Streamlit app (utilization, fair share, budget burn, chargeback, squatters). Not built
yet: the dashboard issue adds it here; pages will read gpuledger.analytics.reports through
warehouse.open_reader, never the live file."""
