# Drawn by `weft bench`; redraw with: gnuplot iteration_time.gp
set terminal pngcairo size 960,520 noenhanced font ',10'
set output 'iteration_time.png'
set multiplot layout 1,2 title "steady-state iteration time\ncnn, 4 workers, batch 32, emulated links"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set xtics rotate by 40 right scale 0
set ylabel 'iteration time (ms)'
set yrange [0:*]
set offsets 0,0,graph 0.22,0
set grid ytics
set key top left
set title '100Mbit'
plot 'iteration_time.dat' index 0 using 2:xtic(1) title 'measured' lc rgb '#1f77b4', \
     '' index 0 using 3 title 'predicted (weft plan)' lc rgb '#ff7f0e'
set title '20Mbit'
plot 'iteration_time.dat' index 1 using 2:xtic(1) title 'measured' lc rgb '#1f77b4', \
     '' index 1 using 3 title 'predicted (weft plan)' lc rgb '#ff7f0e'
unset multiplot
