"""The jars of a standalone Apache ZooKeeper server, pinned, fetched from a Maven repository.

With them a machine needs only Java to run the local clusters' ZooKeeper (no system package).
"""

from __future__ import annotations

from fluss_spark.local import maven
from fluss_spark.local.maven import Jar, JarSet

VERSION = "3.8.4"

_NETTY = "4.1.105.Final"

#: ``org.apache.zookeeper:zookeeper`` and its runtime dependencies as Maven resolves them, plus
#: ``metrics-core`` and ``snappy-java``: its pom marks them provided, its binary release ships
#: them in ``lib/``, and a standalone server does not start without them. Sizes and SHA-256 sums
#: of Maven Central's files (their published SHA-1 sums were checked when they were pinned).
JARS = JarSet(f"Apache ZooKeeper {VERSION}", f"zookeeper/{VERSION}/lib", (
    Jar("org.apache.zookeeper", "zookeeper", VERSION, 1323991,
        "2d77b152039e7f85dc5438a9304febff86a2f3e55c88976a8be309af39028e97"),
    Jar("org.apache.zookeeper", "zookeeper-jute", VERSION, 254932,
        "93e854b55d731e745bafec187e2e7bf3389fd2a88e2fc8d1a3c1b9110284b284"),
    Jar("org.apache.yetus", "audience-annotations", "0.12.0", 20891,
        "ffb101fc066360ff3c77457c927fd7967fb096a6ee9e046ab7071447d8208efc"),
    Jar("io.netty", "netty-handler", _NETTY, 561623,
        "5a6945cf1de374628b37ab1c35a4c47c2f5616db3a94b150720641477112be8e"),
    Jar("io.netty", "netty-common", _NETTY, 660636,
        "399a8045fb43861afb7fc1ef3371f95a0b176692fb268f4867cff4957e63fd25"),
    Jar("io.netty", "netty-resolver", _NETTY, 37814,
        "7202edd076a1edab50fdb0f3e54f56a02129b326296d9f35f4194f8cfb9b96ef"),
    Jar("io.netty", "netty-buffer", _NETTY, 307729,
        "cc1b0108a60b1eb69bd01a10922851a166c58972cc0683f2116a9e8e7ecdaf0b"),
    Jar("io.netty", "netty-transport", _NETTY, 496884,
        "be9b8a2f86685a876e469c904cb9fce53a1e826e178d44d2b1d92f6a99054737"),
    Jar("io.netty", "netty-transport-native-unix-common", _NETTY, 44065,
        "7db91b72aae19e1cdca13c7fa76d57db20cbaf5b1e770563909a4437c63eb5cb"),
    Jar("io.netty", "netty-codec", _NETTY, 345325,
        "c4f62480b408fb835b454c74cf6394a4c7088ffdaec78742fcece816c46bb58e"),
    Jar("io.netty", "netty-transport-native-epoll", _NETTY, 6075,
        "61f09ce16f0fd25e57a0a732f8fb79344f6b95051d88ac50a28874ad92e6d149"),
    Jar("io.netty", "netty-transport-classes-epoll", _NETTY, 147234,
        "a43bf94f784eb759c14f0b0c7e1c5985a64879e8c7ab21ba7c0c80f7a9382b30"),
    Jar("org.slf4j", "slf4j-api", "1.7.30", 41472,
        "cdba07964d1bb40a0761485c6b1e8c2f8fd9eb1d19c53928ac0d7f9510105c57"),
    Jar("ch.qos.logback", "logback-core", "1.2.13", 449638,
        "07b1586faf220c05821d0f3ed8e2e417e214c83f40641f76e8a90b134c31ff6b"),
    Jar("ch.qos.logback", "logback-classic", "1.2.13", 232073,
        "937afb220b91d8a394d78befdbf587c71aeed289d582e2a91e72a7d92172371d"),
    Jar("commons-io", "commons-io", "2.11.0", 327135,
        "961b2f6d87dbacc5d54abf45ab7a6e2495f89b75598962d8c723cea9bc210908"),
    Jar("io.dropwizard.metrics", "metrics-core", "4.1.12.1", 105355,
        "cec34936faa625039f4e46123eccaa10a9eb9d9a40c6075830cd81330e259cf9"),
    Jar("org.xerial.snappy", "snappy-java", "1.1.10.5", 2299797,
        "0f3f1857ed33116583f480b4df5c0218836c47bfbc9c6221c0d73f356decf37b"),
))


def main(argv: list[str] | None = None) -> int:
    """``python -m fluss_spark.local.zookeeper_jars``: fetch and list the jars."""
    return maven.main(JARS.ensure)


if __name__ == "__main__":
    raise SystemExit(main())
