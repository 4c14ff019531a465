"""The data source Spark finds under the name ``liftbridge``: its schema and
the readers and writers it hands out, each made from options checked here,
at planning time."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from liftbridge import InvalidArgumentError
from liftbridge.spark._client_options import lower
from liftbridge.spark._exactly_once import write_id_for
from liftbridge.spark._options import Mode, ReadOptions, read_options, write_options
from liftbridge.spark._reader import LiftbridgeReader, LiftbridgeStreamReader
from liftbridge.spark._schema import read_schema
from liftbridge.spark._writer import LiftbridgeStreamWriter, LiftbridgeWriter, check_schema


def _check_read_schema(schema: StructType, options: ReadOptions) -> None:
    expected = read_schema(options.include_headers, options.headers_array)
    if schema != expected:
        raise InvalidArgumentError(
            f"the liftbridge source has a fixed schema ({expected.simpleString()}); "
            f"drop the user-specified schema {schema.simpleString()}"
        )


class LiftbridgeDataSource(DataSource):
    """Reads and writes Liftbridge streams: ``format("liftbridge")`` for
    ``read``, ``readStream``, ``write`` and ``writeStream``.

    The options are listed in the README's Spark section. Every option is
    checked when the query is planned; errors name the option.
    """

    @classmethod
    def name(cls) -> str:
        """The format name, ``liftbridge``."""
        return "liftbridge"

    def schema(self) -> StructType:
        """``key binary, value binary, stream string, subject string, partition
        int, offset long, timestamp timestamp``, plus ``headers
        map<string,binary>`` with option ``includeHeaders``.

        Spark asks for it in ``load()``, so the read options are checked here
        already, as far as they do not depend on batch versus streaming.
        """
        options = read_options(self.options, None)
        return read_schema(options.include_headers, options.headers_array)

    def reader(self, schema: StructType) -> DataSourceReader:
        """A batch reader (driver)."""
        options = read_options(self.options, Mode.BATCH)
        _check_read_schema(schema, options)
        return LiftbridgeReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A streaming reader (driver)."""
        options = read_options(self.options, Mode.STREAMING)
        _check_read_schema(schema, options)
        return LiftbridgeStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """A batch writer (driver); only the append mode is supported."""
        if overwrite:
            raise InvalidArgumentError(
                "Liftbridge streams are append-only: write with .mode('append')"
            )
        options = write_options(self.options)
        check_schema(schema, options)
        return LiftbridgeWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """A streaming writer (driver); only the append output mode is supported."""
        if overwrite:
            raise InvalidArgumentError(
                "Liftbridge streams are append-only: use outputMode('append')"
            )
        options = write_options(self.options)
        check_schema(schema, options)
        write_id = write_id_for(lower(self.options), options.write_id)
        return LiftbridgeStreamWriter(options, write_id)
