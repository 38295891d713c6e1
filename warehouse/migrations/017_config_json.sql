-- 017: each config version also keeps its validated content as canonical JSON (every setting,
-- defaults filled in: exactly what content_sha256 hashes), so a read command can take the one
-- setting it needs (the fair-share title's usage mode) without validating the whole config again
-- (gpuledger.config_store.StoredConfig.setting). NULL for versions loaded before 017: those are
-- validated from content_text as before.
ALTER TABLE config_versions ADD COLUMN content_json VARCHAR;
