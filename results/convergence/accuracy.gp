# Drawn by `weft bench`; redraw with: gnuplot accuracy.gp
set terminal pngcairo size 640,520 noenhanced font ',10'
set output 'accuracy.png'
set multiplot layout 1,1 title "test accuracy against wall-clock\ncnn, 4 workers, batch 32, emulated links"
set xlabel 'wall-clock (s, rank 0, evaluations included)'
set ylabel 'test accuracy (%)'
set grid
set key bottom right
set linetype 1 lc rgb '#1f77b4' lw 1.5
set linetype 2 lc rgb '#ff7f0e' lw 1.5
set linetype 3 lc rgb '#2ca02c' lw 1.5
set linetype 4 lc rgb '#d62728' lw 1.5
set linetype 5 lc rgb '#9467bd' lw 1.5
set linetype 6 lc rgb '#8c564b' lw 1.5
set linetype 7 lc rgb '#e377c2' lw 1.5
set linetype 8 lc rgb '#7f7f7f' lw 1.5
set linetype 9 lc rgb '#bcbd22' lw 1.5
set linetype 10 lc rgb '#17becf' lw 1.5
set linetype 11 lc rgb '#000000' lw 1.5
set linetype 12 lc rgb '#aec7e8' lw 1.5
set linetype cycle 12
set title '100Mbit'
plot 'accuracy.dat' index 0 using 1:2 with linespoints title 'dreamddp', \
     'accuracy.dat' index 1 using 1:2 with linespoints title 'wfbp', \
     'accuracy.dat' index 2 using 1:2 with linespoints title 'flsgd', \
     85 with lines dt 2 lc rgb 'gray' title 'target 85%'
unset multiplot
