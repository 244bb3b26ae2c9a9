"""The predict job: a serving export over every image -> Parquet shards -> PostgreSQL + pgvector."""
