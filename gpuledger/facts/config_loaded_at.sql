-- When the config in force (the newest stored version) was loaded; NULL without one.
SELECT max(loaded_at) FROM config_versions
