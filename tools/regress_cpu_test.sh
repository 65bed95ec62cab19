#!/bin/sh
# bazel test: the regression tool in CPU mode over every golden file.
exec "$1" --testdata=testdata --variants=reference
