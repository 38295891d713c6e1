-- Who holds idle GPUs: the jobs with the most idle GPU-hours in the period (hourly job usage), most
-- first, with the cost of that idle time at the rate in force each hour (the job's model and pricing
-- tier, else the policy's default tier) and how many jobs idled at all.
WITH per_hour AS (
    SELECT u.cluster, u.job_id, u.project, u.user_name, u.hour, u.gpu_hours_allocated,
           coalesce(u.gpu_hours_idle, 0) AS gpu_hours_idle, j.name, j.gpu_model,
           coalesce(j.pricing_tier, $default_tier) AS tier
    FROM usage_hourly_jobs u
    LEFT JOIN jobs j ON j.cluster = u.cluster AND j.job_id = u.job_id
    WHERE u.hour >= $start AND u.hour < $end AND list_contains($projects::VARCHAR[], u.project)
      AND (len($clusters::VARCHAR[]) = 0 OR list_contains($clusters::VARCHAR[], u.cluster))
),
priced AS (
    SELECT p.*, r.price_per_gpu_hour, r.currency
    FROM per_hour p
    ASOF LEFT JOIN rate_card r ON r.gpu_model = p.gpu_model AND r.tier = p.tier AND r.effective_from <= p.hour
),
per_job AS (
    SELECT cluster, job_id, any_value(project) AS project, any_value(user_name) AS user_name,
           any_value(name) AS name, sum(gpu_hours_allocated) AS gpu_hours_allocated,
           sum(gpu_hours_idle) AS gpu_hours_idle,
           round(sum(gpu_hours_idle::DECIMAL(18, 6) * price_per_gpu_hour), 2) AS idle_cost,
           any_value(currency) AS currency
    FROM priced
    GROUP BY cluster, job_id
    HAVING sum(gpu_hours_idle) > 0
)
SELECT *, count(*) OVER () AS jobs_idle, sum(gpu_hours_idle) OVER () AS gpu_hours_idle_all
FROM per_job
ORDER BY gpu_hours_idle DESC, cluster, job_id
LIMIT $limit
