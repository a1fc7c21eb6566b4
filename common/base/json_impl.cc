// Debian's Boost 1.81 ships Boost.JSON as headers only: its implementation is compiled here, once
// for the whole project.
#include <boost/json/src.hpp>
