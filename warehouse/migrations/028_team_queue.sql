-- 028: team leads run their own queue, owners answer a squatting alert (issue 38).
-- team_choices: per queued job, what its team's lead chose: its place in the team's own order
-- (permuted only among the team's queued jobs of one band: enforce.team), whether the team's
-- budget funds it (for how many hours, committing normalised GPU-hours of the remaining budget),
-- and whether it is held. Enforcement reads it every cycle; team_audit keeps every change.
CREATE TABLE team_choices (
    cluster         VARCHAR NOT NULL,
    job_id          VARCHAR NOT NULL,
    node            VARCHAR NOT NULL,   -- the org node (team) whose lead chose
    position        INTEGER,            -- 1 = served first among the team's ordered jobs; NULL: no order
    fund_hours      DOUBLE,             -- funded by the team's budget for this minimum runtime (h); NULL: not marked
    fund_gpu_hours  DOUBLE,             -- normalised GPU-hours that funding commits (GPUs x hours x budget weight)
    held            BOOLEAN NOT NULL DEFAULT false,
    set_by          VARCHAR NOT NULL,   -- the lead's e-mail
    set_at          TIMESTAMP NOT NULL, -- UTC
    PRIMARY KEY (cluster, job_id)
);

CREATE TABLE team_audit (
    changed_at      TIMESTAMP NOT NULL, -- UTC, wall clock
    changed_by      VARCHAR NOT NULL,   -- the lead's e-mail
    identity        VARCHAR NOT NULL,   -- how it was established: "oidc" / "cli (OS user NAME)"
    node            VARCHAR NOT NULL,
    change          VARCHAR NOT NULL,   -- order / fund / unfund / hold / release
    cluster         VARCHAR NOT NULL,
    job_id          VARCHAR NOT NULL,
    before          VARCHAR,            -- e.g. "position 2" / "not funded" / "held"
    after           VARCHAR
);

-- owner_choices: what a job's owner chose from a squatting alert (a signed link or the CLI): keep
-- the session for a bounded time, release it now, or ask for an exemption; granted or refused
-- with why. Enforcement honours a granted keep until kept_until; the weekly allowance counts the
-- granted hours. link_id: a digest of the signed link, so each link acts once.
CREATE TABLE owner_choices (
    asked_at        TIMESTAMP NOT NULL, -- UTC
    cluster         VARCHAR NOT NULL,
    job_id          VARCHAR NOT NULL,
    project         VARCHAR,
    user_name       VARCHAR NOT NULL,   -- the owner who chose
    identity        VARCHAR NOT NULL,   -- "signed link" / "cli (OS user NAME)"
    choice          VARCHAR NOT NULL,   -- keep / release / exemption
    hours           DOUBLE,             -- keep: hours asked
    kept_until      TIMESTAMP,          -- keep granted: enforcement leaves the job alone until then
    outcome         VARCHAR NOT NULL,   -- granted / refused
    why             VARCHAR NOT NULL,
    link_id         VARCHAR UNIQUE
);

-- a hold a lead asked for, as applied on the scheduler (enforce: hold / release actions)
ALTER TABLE enforcement_job_state ADD COLUMN held BOOLEAN;
