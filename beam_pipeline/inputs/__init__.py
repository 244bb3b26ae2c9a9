"""The input side, below the jobs: reading the list of images (its rows, their keys and shards), what a path or
URL cell names, and reading or fetching each row's bytes. The jobs import it; it imports only `common` and
`tf_serving_input`.
"""
