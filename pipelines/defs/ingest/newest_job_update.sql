-- The newest job row update from any of the sources (naive UTC), NULL when there is none.
SELECT max(updated_at) AS newest FROM jobs WHERE list_contains($sources, source)
