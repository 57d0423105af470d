"""Airflow DAG ``ldpflow_heavy_hitters_daily``: heavy hitters of each day's report files.

Every day at 02:30 UTC, one run of ``ldpflow heavy-hitters`` over the files of the day
that has just ended, on the runner of your choice. Copy this file into the DAGs folder of an
Airflow (2.4 or later, or 3.x) whose workers have ldpflow installed (``pip install
'ldpflow[beam]'`` plus the runner's extras, e.g. ``apache-beam[gcp]`` for Dataflow), and
set one Airflow Variable, ``ldpflow_heavy_hitters`` (JSON: the report and output prefixes,
the clients' PEM configuration and the runner's flags, e.g. one of ``deploy/*/*.flags``
expanded)::

    # edit the values first
    airflow variables import deploy/airflow/variables.example.json

The day: the timetable is a cron *data interval* one, so the run that starts at
2026-11-30 02:30 UTC covers the interval [2026-11-29 02:30, 2026-11-30 02:30) and
``data_interval_start | ds`` is ``2026-11-29``: the input is
``REPORTS/dt=2026-11-29/*.avro`` and the output ``OUTPUT/dt=2026-11-29``. This holds on
Airflow 2 and 3 alike (Airflow 3's default timetable for a cron string would start the
interval at the run time instead, i.e. today). Backfill the day 2026-11-20 (the run whose
interval starts on 2026-11-20 at 02:30) with
``airflow dags backfill -s 2026-11-20 -e 2026-11-21 ldpflow_heavy_hitters_daily`` (Airflow 2)
or ``airflow backfill create --dag-id ldpflow_heavy_hitters_daily --from-date 2026-11-20
--to-date 2026-11-21`` (Airflow 3).

The task waits for the job to end, so its state is the job's; it is retried once.
This file needs Airflow to import; ldpflow itself does not depend on Airflow.
"""

from __future__ import annotations

import datetime

import pendulum
from airflow import DAG
from airflow.timetables.interval import CronDataIntervalTimetable

try:  # Airflow 3
    from airflow.providers.standard.operators.bash import BashOperator
except ImportError:  # Airflow 2
    from airflow.operators.bash import BashOperator

DAY = "{{ data_interval_start | ds }}"
CONFIG = "var.json.ldpflow_heavy_hitters"

#: The command line, one token per item (tests/deploy checks it against the CLI's flags).
COMMAND = [
    "ldpflow", "heavy-hitters",
    "--input='{{ " + CONFIG + ".reports }}/dt=" + DAY + "/*.avro'",
    "--output='{{ " + CONFIG + ".output }}/dt=" + DAY + "'",
    "--k={{ " + CONFIG + ".k }}",
    "--bits={{ " + CONFIG + ".bits }}",
    "--expect_epsilon={{ " + CONFIG + ".epsilon }}",
    "--codec={{ " + CONFIG + ".codec }}",
    "{{ " + CONFIG + ".runner_flags }}",
]

with DAG(
    dag_id="ldpflow_heavy_hitters_daily",
    description="ldpflow heavy-hitters over the previous day's report files",
    schedule=CronDataIntervalTimetable("30 2 * * *", timezone="UTC"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 1, "retry_delay": datetime.timedelta(minutes=15)},
    tags=["ldpflow"],
) as dag:
    BashOperator(
        task_id="heavy_hitters",
        bash_command=" ".join(COMMAND),
        execution_timeout=datetime.timedelta(hours=6),
    )
